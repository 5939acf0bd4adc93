//! What is wrong with a config file: [`ConfigError`] (unreadable, malformed, or values that
//! cannot be used, all of them listed at once) and the collector validation fills.

use std::path::PathBuf;

/// A config file that cannot be used.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config `{path}`: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The TOML is malformed or has unknown keys.
    #[error("invalid config `{path}`: {message}")]
    #[diagnostic(help("docs/configuration.md lists every key, with its default"))]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, with line and column.
        message: String,
    },
    /// Values are out of range or inconsistent: every problem found, each naming its key.
    #[error("invalid config `{path}`: {}", list(problems))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Each problem and how to fix it, in the order of the keys checked.
        problems: Vec<KeyProblem>,
    },
}

/// One value of a config file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyProblem {
    /// What is wrong, naming the key (`` `listen` = `x` is not an address ``).
    pub message: String,
    /// How to fix it.
    pub help: String,
}

/// One problem inline; several as a numbered list, one per line.
fn list(problems: &[KeyProblem]) -> String {
    match problems {
        [one] => format!("{} (help: {})", one.message, one.help),
        many => {
            let mut out = format!("{} problems:", many.len());
            for (i, p) in many.iter().enumerate() {
                out.push_str(&format!("\n  {}. {} (help: {})", i + 1, p.message, p.help));
            }
            out
        }
    }
}

/// The problems found while validating one file: each check adds its own and the next check
/// goes on with a stand-in value, so one run reports them all.
#[derive(Default)]
pub(super) struct Problems(pub(super) Vec<KeyProblem>);

impl Problems {
    pub(super) fn add(&mut self, message: String, help: impl Into<String>) {
        self.0.push(KeyProblem {
            message,
            help: help.into(),
        });
    }

    /// `checked`'s value, or `stand_in` once all its problems are noted.
    pub(super) fn take_all<T, H: Into<String>>(
        &mut self,
        checked: Result<T, Vec<(String, H)>>,
        stand_in: impl FnOnce() -> T,
    ) -> T {
        checked.unwrap_or_else(|found| {
            for (message, help) in found {
                self.add(message, help);
            }
            stand_in()
        })
    }

    /// `checked`'s value, or `stand_in` once its problem is noted.
    pub(super) fn take<T, H: Into<String>>(
        &mut self,
        checked: Result<T, (String, H)>,
        stand_in: impl FnOnce() -> T,
    ) -> T {
        checked.unwrap_or_else(|(message, help)| {
            self.add(message, help);
            stand_in()
        })
    }
}
