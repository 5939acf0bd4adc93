//! Load problems as human diagnostics: every problem names its file and, where one exists,
//! the line and column, with the offending source line shown by miette.
//!
//! Owns: converting Cedar, serde and manifest errors into [`Problem`]s. Does not decide which
//! problems stop a load (see `load`).

use std::fmt;
use std::path::Path;

use miette::{Diagnostic, LabeledSpan, NamedSource, SourceSpan};

/// Whether a problem blocks the load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// The policy set is refused.
    Error,
    /// Reported; the set still loads.
    Warning,
}

/// One problem found while loading policies, schema, entities or manifests.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Problem {
    /// Blocks the load or not.
    pub level: Level,
    /// The file, as given to the loader.
    pub file: String,
    /// 1-based line, when the problem has a location.
    pub line: Option<usize>,
    /// 1-based column, when the problem has a location.
    pub column: Option<usize>,
    /// What is wrong (one line).
    pub message: String,
    /// How to fix it.
    pub help: Option<String>,
    #[serde(skip)]
    source: Option<(NamedSource<String>, SourceSpan)>,
}

impl Problem {
    /// A problem with a file but no position.
    pub fn in_file(file: &Path, message: impl Into<String>, help: Option<String>) -> Self {
        Problem {
            level: Level::Error,
            file: file.display().to_string(),
            line: None,
            column: None,
            message: message.into(),
            help,
            source: None,
        }
    }

    /// A non-blocking problem with a file but no position.
    pub fn warning(file: &Path, message: impl Into<String>, help: Option<String>) -> Self {
        let mut p = Problem::in_file(file, message, help);
        p.level = Level::Warning;
        p
    }

    /// A problem at a 1-based line and column of `text`.
    pub fn at_line(
        file: &Path,
        text: &str,
        line: usize,
        column: usize,
        message: impl Into<String>,
        help: Option<String>,
    ) -> Self {
        let offset = offset_of(text, line, column);
        Problem::in_file(file, message, help).with_span(text, offset, 1)
    }

    /// Converts a diagnostic whose labels point into `text` (Cedar's errors do), flattening
    /// its related diagnostics into separate problems.
    pub fn from_diagnostic(
        file: &Path,
        text: &str,
        diag: &dyn Diagnostic,
        level: Level,
    ) -> Vec<Self> {
        let mut out = vec![Self::one(file, text, diag, level)];
        if let Some(related) = diag.related() {
            out.extend(related.map(|r| Self::one(file, text, r, level)));
        }
        out
    }

    fn one(file: &Path, text: &str, diag: &dyn Diagnostic, level: Level) -> Self {
        // The causes say what the headline does not ("error during entity deserialization":
        // which entity, which attribute).
        let mut message = diag.to_string();
        let mut cause = std::error::Error::source(diag);
        while let Some(c) = cause {
            let more = c.to_string();
            if !message.contains(&more) {
                message = format!("{message}: {more}");
            }
            cause = c.source();
        }
        let mut p = Problem::in_file(file, one_line(&message), diag.help().map(|h| h.to_string()));
        p.level = level;
        let first = diag.labels().and_then(|mut l| l.next());
        match first {
            Some(label) => p.with_span(text, label.offset(), label.len()),
            None => match entity_offset(text, &message) {
                Some(offset) => p.with_span(text, offset, 0),
                None => p,
            },
        }
    }

    fn with_span(mut self, text: &str, offset: usize, len: usize) -> Self {
        let offset = offset.min(text.len());
        let (line, column) = line_col(text, offset);
        self.line = Some(line);
        self.column = Some(column);
        self.source = Some((
            NamedSource::new(self.file.clone(), text.to_owned()),
            SourceSpan::new(offset.into(), len.min(text.len() - offset)),
        ));
        self
    }

    /// This problem with `more` added to its help.
    pub fn with_more_help(mut self, more: &str) -> Self {
        self.help = Some(match self.help.take() {
            Some(own) => format!("{own}; {more}"),
            None => more.to_owned(),
        });
        self
    }

    /// `file:line:column` or just `file`.
    pub fn location(&self) -> String {
        match (self.line, self.column) {
            (Some(l), Some(c)) => format!("{}:{l}:{c}", self.file),
            (Some(l), None) => format!("{}:{l}", self.file),
            _ => self.file.clone(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location(), self.message)
    }
}

impl std::error::Error for Problem {}

impl Diagnostic for Problem {
    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.help
            .as_ref()
            .map(|h| Box::new(h) as Box<dyn fmt::Display>)
    }

    fn severity(&self) -> Option<miette::Severity> {
        Some(match self.level {
            Level::Error => miette::Severity::Error,
            Level::Warning => miette::Severity::Warning,
        })
    }

    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        self.source
            .as_ref()
            .map(|(s, _)| s as &dyn miette::SourceCode)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        let (_, span) = self.source.as_ref()?;
        Some(Box::new(std::iter::once(LabeledSpan::new_with_span(
            Some("here".to_owned()),
            *span,
        ))))
    }
}

/// Every blocking problem of a failed load, reported at once.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", summary(.problems))]
pub struct LoadError {
    /// Problems in file order; at least one has level `Error`.
    pub problems: Vec<Problem>,
}

impl LoadError {
    /// The first blocking problem, for one-line reports (health, metrics, logs).
    pub fn first(&self) -> Option<&Problem> {
        self.problems.iter().find(|p| p.level == Level::Error)
    }
}

fn summary(problems: &[Problem]) -> String {
    let errors: Vec<_> = problems
        .iter()
        .filter(|p| p.level == Level::Error)
        .collect();
    let mut s = format!(
        "policy set refused: {} error{}",
        errors.len(),
        if errors.len() == 1 { "" } else { "s" }
    );
    for p in errors {
        s.push_str("\n  ");
        s.push_str(&p.to_string());
    }
    s
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Where in an entities file the entity a message names (`Agent::"dev-agent"`) is declared:
/// the offset of its `"id": "dev-agent"`.
fn entity_offset(text: &str, message: &str) -> Option<usize> {
    let id = message.split("::\"").nth(1)?.split('"').next()?;
    let quoted = format!("\"{id}\"");
    let mut from = 0;
    while let Some(at) = text.get(from..)?.find(&quoted) {
        let pos = from + at;
        let key = text
            .get(..pos)?
            .trim_end()
            .strip_suffix(':')
            .map(str::trim_end);
        if key.is_some_and(|k| k.ends_with("\"id\"")) {
            return Some(pos);
        }
        from = pos + quoted.len();
    }
    None
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

fn offset_of(text: &str, line: usize, column: usize) -> usize {
    let line_start: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    let rest = text.get(line_start..).unwrap_or("");
    let col_bytes: usize = rest
        .chars()
        .take(column.saturating_sub(1))
        .map(char::len_utf8)
        .sum();
    (line_start + col_bytes).min(text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_and_lines_round_trip() {
        let text = "ab\ncdé\nf";
        for (line, col) in [(1, 1), (2, 3), (3, 1)] {
            assert_eq!(line_col(text, offset_of(text, line, col)), (line, col));
        }
    }
}
