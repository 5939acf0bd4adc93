//! The edit engine of `edit_file`, on text alone: every edit is located in the *original*
//! text, its matches are counted against its expected `count`, the target ranges of all edits
//! are checked for overlap, and only then is the new text built in one pass. Any failure
//! leaves nothing half-done: the caller writes the result or nothing.

use serde::Deserialize;

use super::pattern::{Pattern, PatternError};

/// What an edit does with each match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// Replace the matched text with `content`.
    Replace,
    /// Insert `content` right after the matched text.
    AppendAfter,
    /// Insert `content` right before the matched text.
    PrependBefore,
    /// Remove the matched text.
    Delete,
}

/// How `spec` is matched.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MatchMode {
    /// `spec` is literal text.
    #[default]
    Exact,
    /// `spec` is a regular expression (linear-time engine); `content` stays literal.
    Regex,
}

/// One edit as the agent sends it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Edit {
    /// What to do.
    pub operation: Operation,
    /// How `spec` is matched.
    #[serde(default)]
    pub match_mode: MatchMode,
    /// The text (or pattern) to find.
    pub spec: String,
    /// The text to put in (not for `delete`).
    #[serde(default)]
    pub content: Option<String>,
    /// How many matches `spec` must have (default 1).
    #[serde(default = "one")]
    pub count: usize,
}

fn one() -> usize {
    1
}

/// An edit whose match count differs from the expected one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// Index of the edit in the list.
    pub index: usize,
    /// `count` as sent.
    pub expected: usize,
    /// Matches found.
    pub found: usize,
}

/// Why an edit list was not applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    /// An edit that cannot be run as written.
    #[error("edit {index}: {message}")]
    Invalid {
        /// Index of the edit.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// One or more edits matched a different number of times than expected.
    #[error("{}", describe(.0))]
    MatchCountMismatch(Vec<Mismatch>),
    /// Two edits target overlapping text.
    #[error("edits {first} and {second} target overlapping text (at byte {at})")]
    Overlapping {
        /// The earlier edit's index.
        first: usize,
        /// The later edit's index.
        second: usize,
        /// Where the overlap starts.
        at: usize,
    },
    /// The time budget ran out while matching.
    #[error("matching ran out of its time budget")]
    OutOfTime,
    /// The edited text would be larger than the limit (its size in bytes).
    #[error("the edited text would be {0} bytes, over the limit")]
    TooLarge(usize),
}

/// Matches changed by one call at most, over all its edits.
const MAX_TARGETS: usize = 100_000;

fn describe(mismatches: &[Mismatch]) -> String {
    mismatches
        .iter()
        .map(|m| {
            format!(
                "edit {}: expected {} match{}, found {}",
                m.index,
                m.expected,
                if m.expected == 1 { "" } else { "es" },
                m.found
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// One located target: a byte range of the original text and the edit it belongs to.
#[derive(Debug, Clone, Copy)]
struct Target {
    start: usize,
    end: usize,
    edit: usize,
}

/// What one edit matched, for the answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Applied {
    /// Index of the edit.
    pub index: usize,
    /// Matches it changed.
    pub matches: usize,
}

/// Applies `edits` to `text`, all or none; the result may not exceed `limit` bytes. `in_time`
/// is asked between matches; `false` stops with [`EditError::OutOfTime`].
pub fn apply(
    text: &str,
    edits: &[Edit],
    limit: usize,
    in_time: &dyn Fn() -> bool,
) -> Result<(String, Vec<Applied>), EditError> {
    let mut targets: Vec<Target> = Vec::new();
    let mut mismatches = Vec::new();
    let mut applied = Vec::with_capacity(edits.len());
    for (index, edit) in edits.iter().enumerate() {
        check(index, edit)?;
        let pattern = match edit.match_mode {
            MatchMode::Exact => Pattern::literal(&edit.spec),
            MatchMode::Regex => Pattern::regex(&edit.spec),
        }
        .map_err(|e: PatternError| EditError::Invalid {
            index,
            message: e.to_string(),
        })?;
        let mut found = 0usize;
        for (start, end) in pattern.find_iter(text) {
            if !in_time() {
                return Err(EditError::OutOfTime);
            }
            found += 1;
            // Past the expected count the ranges are not needed: the call aborts.
            if found <= edit.count {
                if targets.len() >= MAX_TARGETS {
                    return Err(EditError::Invalid {
                        index,
                        message: format!("more than {MAX_TARGETS} matches in all edits"),
                    });
                }
                targets.push(Target {
                    start,
                    end,
                    edit: index,
                });
            }
        }
        if found != edit.count {
            mismatches.push(Mismatch {
                index,
                expected: edit.count,
                found,
            });
        }
        applied.push(Applied {
            index,
            matches: found,
        });
    }
    if !mismatches.is_empty() {
        return Err(EditError::MatchCountMismatch(mismatches));
    }
    targets.sort_by_key(|t| (t.start, t.end, t.edit));
    for pair in targets.windows(2) {
        if let [a, b] = pair
            && overlap(a, b)
        {
            let (first, second) = (a.edit.min(b.edit), a.edit.max(b.edit));
            return Err(EditError::Overlapping {
                first,
                second,
                at: b.start,
            });
        }
    }
    match new_size(text.len(), edits, &targets) {
        Some(size) if size <= limit => Ok((build(text, edits, &targets, size), applied)),
        other => Err(EditError::TooLarge(other.unwrap_or(usize::MAX))),
    }
}

/// The edited text's length, computed before building it (`None`: it overflows).
fn new_size(len: usize, edits: &[Edit], targets: &[Target]) -> Option<usize> {
    targets.iter().try_fold(len, |n, t| {
        let edit = edits.get(t.edit)?;
        let added = edit.content.as_deref().map_or(0, str::len);
        match edit.operation {
            Operation::Replace => n.checked_sub(t.end - t.start)?.checked_add(added),
            Operation::Delete => n.checked_sub(t.end - t.start),
            Operation::AppendAfter | Operation::PrependBefore => n.checked_add(added),
        }
    })
}

/// Ranges overlap when they share a byte, or are the same empty range (two insertions whose
/// order nothing decides). Ranges that only touch do not.
fn overlap(a: &Target, b: &Target) -> bool {
    (a.start < b.end && b.start < a.end) || (a.start == b.start && a.end == b.end)
}

fn check(index: usize, edit: &Edit) -> Result<(), EditError> {
    let invalid = |message: &str| {
        Err(EditError::Invalid {
            index,
            message: message.to_owned(),
        })
    };
    if edit.spec.is_empty() {
        return invalid("`spec` is empty; name the text to find");
    }
    if edit.count == 0 {
        return invalid("`count` must be at least 1");
    }
    match (edit.operation, &edit.content) {
        (Operation::Delete, Some(c)) if !c.is_empty() => {
            invalid("`delete` takes no `content`; use `replace` to put text in")
        }
        (Operation::Replace | Operation::AppendAfter | Operation::PrependBefore, None) => {
            invalid("`content` is required for this operation")
        }
        _ => Ok(()),
    }
}

/// The new text: the original with each target's change, in order. Targets do not overlap;
/// an insertion at the point where a replaced range starts goes first.
fn build(text: &str, edits: &[Edit], targets: &[Target], size: usize) -> String {
    // Each change as (from, to, replacement) over the original.
    let mut changes: Vec<(usize, usize, &str, usize)> = targets
        .iter()
        .filter_map(|t| {
            let edit = edits.get(t.edit)?;
            let content = edit.content.as_deref().unwrap_or("");
            Some(match edit.operation {
                Operation::Replace => (t.start, t.end, content, t.edit),
                Operation::Delete => (t.start, t.end, "", t.edit),
                Operation::AppendAfter => (t.end, t.end, content, t.edit),
                Operation::PrependBefore => (t.start, t.start, content, t.edit),
            })
        })
        .collect();
    changes.sort_by_key(|&(from, to, _, edit)| (from, to, edit));
    let mut out = String::with_capacity(size);
    let mut at = 0usize;
    for (from, to, with, _) in changes {
        out.push_str(text.get(at..from).unwrap_or(""));
        out.push_str(with);
        at = to.max(at);
    }
    out.push_str(text.get(at..).unwrap_or(""));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edit(op: Operation, spec: &str, content: Option<&str>) -> Edit {
        Edit {
            operation: op,
            match_mode: MatchMode::Exact,
            spec: spec.to_owned(),
            content: content.map(str::to_owned),
            count: 1,
        }
    }

    fn run(text: &str, edits: &[Edit]) -> Result<String, EditError> {
        apply(text, edits, 1 << 20, &|| true).map(|(t, _)| t)
    }

    #[test]
    fn all_four_operations_apply_against_the_original() {
        let text = "a\nb\nc\nd\n";
        let out = run(
            text,
            &[
                edit(Operation::Replace, "a\n", Some("A\n")),
                edit(Operation::AppendAfter, "b\n", Some("b2\n")),
                edit(Operation::PrependBefore, "c\n", Some("c0\n")),
                edit(Operation::Delete, "d\n", None),
            ],
        )
        .unwrap();
        assert_eq!(out, "A\nb\nb2\nc0\nc\n");
    }

    #[test]
    fn counts_must_match_exactly() {
        let text = "x x x";
        let e = run(text, &[edit(Operation::Replace, "x", Some("y"))]).unwrap_err();
        assert_eq!(
            e,
            EditError::MatchCountMismatch(vec![Mismatch {
                index: 0,
                expected: 1,
                found: 3
            }])
        );
        let mut all = edit(Operation::Replace, "x", Some("y"));
        all.count = 3;
        assert_eq!(run(text, &[all]).unwrap(), "y y y");
        let missing = run(text, &[edit(Operation::Delete, "z", None)]).unwrap_err();
        assert!(missing.to_string().contains("found 0"), "{missing}");
    }

    #[test]
    fn overlapping_targets_are_refused_touching_ones_are_not() {
        let text = "abcdef";
        let e = run(
            text,
            &[
                edit(Operation::Replace, "abc", Some("1")),
                edit(Operation::Replace, "cd", Some("2")),
            ],
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                EditError::Overlapping {
                    first: 0,
                    second: 1,
                    ..
                }
            ),
            "{e:?}"
        );
        // The same text targeted twice overlaps too.
        let e = run(
            text,
            &[
                edit(Operation::AppendAfter, "abc", Some("1")),
                edit(Operation::PrependBefore, "abc", Some("2")),
            ],
        )
        .unwrap_err();
        assert!(matches!(e, EditError::Overlapping { .. }), "{e:?}");
        let out = run(
            text,
            &[
                edit(Operation::AppendAfter, "abc", Some("1")),
                edit(Operation::PrependBefore, "def", Some("2")),
            ],
        )
        .unwrap();
        assert_eq!(out, "abc12def");
    }

    #[test]
    fn regex_specs_match_and_content_stays_literal() {
        let mut e = edit(Operation::Replace, r"v\d+\.\d+", Some("v$1"));
        e.match_mode = MatchMode::Regex;
        assert_eq!(run("version v1.2 here", &[e]).unwrap(), "version v$1 here");
    }

    #[test]
    fn bad_edits_say_which_and_why() {
        let cases = [
            (edit(Operation::Replace, "", Some("x")), "empty"),
            (edit(Operation::Replace, "a", None), "required"),
            (edit(Operation::Delete, "a", Some("x")), "no `content`"),
        ];
        for (e, why) in cases {
            let err = run("a", &[e]).unwrap_err();
            assert!(err.to_string().contains(why), "{err}");
        }
        let mut bad = edit(Operation::Replace, "(", Some("x"));
        bad.match_mode = MatchMode::Regex;
        assert!(matches!(
            run("a", &[bad]),
            Err(EditError::Invalid { index: 0, .. })
        ));
    }

    #[test]
    fn the_time_budget_stops_matching() {
        let e = apply("aaa", &[edit(Operation::Delete, "a", None)], 10, &|| false).unwrap_err();
        assert_eq!(e, EditError::OutOfTime);
    }

    #[test]
    fn a_result_over_the_limit_is_refused_before_it_is_built() {
        let mut grow = edit(Operation::Replace, "x", Some(&"y".repeat(1000)));
        grow.count = 100;
        let e = apply(&"x".repeat(100), &[grow], 50_000, &|| true).unwrap_err();
        assert_eq!(e, EditError::TooLarge(100_000));
    }
}
