//! Turns a run's captured stdout into the result's `data`: ANSI escapes and other control
//! characters stripped, the truncation strategy applied (head, tail or both ends; bytes, then
//! lines) with a `[TRUNCATED] (N bytes)` marker where text was cut, then parsed as text, JSON
//! or JSON lines.

use serde_json::Value;

use super::run::Capture;
use crate::tools::{Keep, Parser, Truncate};

/// The text of a run's output after stripping and truncation.
#[derive(Debug, PartialEq, Eq)]
pub struct Text {
    /// What is shown.
    pub text: String,
    /// Whether anything was cut.
    pub truncated: bool,
}

/// Strips terminal escapes and control characters other than tab and newline.
pub fn clean(bytes: &[u8]) -> String {
    // The stripper drops tabs; they never occur inside an escape sequence, so each
    // tab-separated piece is stripped on its own.
    let pieces: Vec<String> = bytes
        .split(|b| *b == b'\t')
        .map(|piece| {
            let stripped = strip_ansi_escapes::strip(piece);
            String::from_utf8_lossy(&stripped)
                .chars()
                .filter(|c| !c.is_control() || *c == '\n')
                .collect()
        })
        .collect();
    pieces.join("\t")
}

/// Assembles the kept parts of `cap` according to `t`.
pub fn assemble(cap: &Capture, t: &Truncate) -> Text {
    let (head, tail) = cap.parts();
    let head = clean(head);
    let tail = clean(&tail);
    let available = head.len() + tail.len();
    let (first, last) = match t.lines {
        None => (head, tail),
        Some(n) => match t.keep {
            Keep::Head => (first_lines(&head, n), String::new()),
            Keep::Tail if tail.is_empty() => (String::new(), last_lines(&head, n)),
            Keep::Tail => (String::new(), last_lines(&tail, n)),
            Keep::Both if tail.is_empty() => {
                if head.lines().count() <= 2 * n {
                    (head, String::new())
                } else {
                    (first_lines(&head, n), last_lines(&head, n))
                }
            }
            Keep::Both => (first_lines(&head, n), last_lines(&tail, n)),
        },
    };
    let shown = first.len() + last.len();
    let truncated = cap.cut() > 0 || shown < available;
    if !truncated {
        return Text {
            text: format!("{first}{last}"),
            truncated: false,
        };
    }
    let n = cap.total.saturating_sub(shown as u64);
    let marker = format!("[TRUNCATED] ({n} bytes)");
    let sep = if first.ends_with('\n') { "" } else { "\n" };
    let text = match (first.is_empty(), last.is_empty()) {
        (false, true) => format!("{first}{sep}{marker}"),
        (true, _) => format!("{marker}\n{last}"),
        (false, false) => format!("{first}{sep}{marker}\n{last}"),
    };
    Text {
        text,
        truncated: true,
    }
}

fn first_lines(s: &str, n: usize) -> String {
    s.split_inclusive('\n').take(n).collect()
}

fn last_lines(s: &str, n: usize) -> String {
    let trimmed = s.strip_suffix('\n').unwrap_or(s);
    let lines: Vec<&str> = trimmed.split('\n').collect();
    let from = lines.len().saturating_sub(n);
    let mut out = lines.get(from..).unwrap_or_default().join("\n");
    if s.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// Why output could not be parsed.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// Truncated output is not valid JSON.
    #[error("the output was cut at `max_output_bytes` and cannot be parsed as JSON")]
    Truncated,
    /// Not JSON (line is 1-based for `jsonl`).
    #[error("the output is not valid JSON{}: {message}", line.map(|l| format!(" (line {l})")).unwrap_or_default())]
    Invalid {
        /// The line, for JSON lines.
        line: Option<usize>,
        /// The parser's message (position only, never the content).
        message: String,
    },
}

/// Parses the assembled output.
pub fn parse(parser: Parser, out: &Text) -> Result<Value, ParseError> {
    match parser {
        Parser::Text => Ok(Value::String(out.text.clone())),
        _ if out.truncated => Err(ParseError::Truncated),
        Parser::Json => serde_json::from_str(&out.text).map_err(|e| ParseError::Invalid {
            line: None,
            message: format!("at line {} column {}", e.line(), e.column()),
        }),
        Parser::Jsonl => out
            .text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                serde_json::from_str(l).map_err(|e| ParseError::Invalid {
                    line: Some(i + 1),
                    message: format!("at column {}", e.column()),
                })
            })
            .collect::<Result<Vec<Value>, _>>()
            .map(Value::Array),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap(text: &str, head: usize, tail: usize) -> Capture {
        let mut c = Capture::new(head, tail);
        c.push(text.as_bytes());
        c
    }

    #[test]
    fn escapes_and_controls_are_stripped() {
        assert_eq!(clean(b"\x1b[31mred\x1b[0m\r\nok\x07\t!"), "red\nok\t!");
        assert_eq!(clean(b"\x1b]0;title\x07text"), "text");
    }

    #[test]
    fn truncation_keeps_what_the_strategy_says() {
        let all = Truncate::default();
        assert_eq!(
            assemble(&cap("abcdef", 3, 0), &all),
            Text {
                text: "abc\n[TRUNCATED] (3 bytes)".into(),
                truncated: true
            }
        );
        let tail = Truncate {
            keep: Keep::Tail,
            lines: Some(2),
        };
        let t = assemble(&cap("1\n2\n3\n4\n", 0, 100), &tail);
        assert_eq!(t.text, "[TRUNCATED] (4 bytes)\n3\n4\n");
        let both = Truncate {
            keep: Keep::Both,
            lines: Some(1),
        };
        let t = assemble(&cap("1\n2\n3\n4\n", 100, 0), &both);
        assert_eq!(t.text, "1\n[TRUNCATED] (4 bytes)\n4\n");
        let t = assemble(&cap("1\n2\n", 100, 0), &both);
        assert_eq!((t.text.as_str(), t.truncated), ("1\n2\n", false));
    }

    #[test]
    fn json_parsers_refuse_cut_or_broken_output() {
        let whole = |s: &str| Text {
            text: s.into(),
            truncated: false,
        };
        assert_eq!(
            parse(Parser::Json, &whole("{\"a\":1}")).ok(),
            Some(serde_json::json!({"a":1}))
        );
        assert_eq!(
            parse(Parser::Jsonl, &whole("1\n\n[2]\n")).ok(),
            Some(serde_json::json!([1, [2]]))
        );
        assert!(matches!(
            parse(Parser::Jsonl, &whole("1\nx\n")),
            Err(ParseError::Invalid { line: Some(2), .. })
        ));
        let cut = Text {
            text: "{".into(),
            truncated: true,
        };
        assert!(matches!(
            parse(Parser::Json, &cut),
            Err(ParseError::Truncated)
        ));
    }
}
