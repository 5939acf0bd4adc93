//! A manifest's `executor` section: parsed and checked once at load into an [`Executor`], and
//! rendered per call into an argv by [`Executor::render`].
//!
//! The argv template is a list of elements, each a literal, a string with exactly one
//! `{placeholder}` (which becomes part of exactly one argv element, whatever the value
//! holds), or a group `{"if": "name", "args": [...]}` kept only when argument `name` is
//! present and not `false`. An element whose argument is absent is left out. A value bound to
//! a whole element may not start with `-` unless `allow_dash` names it; path arguments go
//! through the jail and are passed as absolute, resolved paths.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::jail::{Jail, JailError};

/// How a tool's standard output becomes the result's `data`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Parser {
    /// A string (ANSI escapes stripped, invalid UTF-8 replaced).
    #[default]
    Text,
    /// One JSON document.
    Json,
    /// One JSON document per non-empty line, as an array.
    Jsonl,
}

/// Which part of long output is kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Keep {
    /// The beginning.
    #[default]
    Head,
    /// The end (test runners print their summary last).
    Tail,
    /// Both ends, cut in the middle.
    Both,
}

/// The output truncation strategy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Truncate {
    /// Which part to keep when the output is over `max_output_bytes` (or `lines`).
    #[serde(default)]
    pub keep: Keep,
    /// Keep at most this many lines (per end for `both`).
    #[serde(default)]
    pub lines: Option<usize>,
}

/// Retries for exit codes the manifest marks as transient.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retry {
    /// Exit codes worth another attempt.
    pub exit_codes: Vec<i32>,
    /// Further attempts after the first (at most 5).
    #[serde(default = "default_attempts")]
    pub attempts: u32,
    /// Wait before the first retry; doubled for each further one.
    #[serde(default = "default_backoff_ms")]
    pub backoff_ms: u64,
}

fn default_attempts() -> u32 {
    2
}
fn default_backoff_ms() -> u64 {
    200
}

/// Per-tool resource limits, overriding `[exec.limits]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitOverrides {
    /// CPU seconds per process.
    pub cpu_secs: Option<u64>,
    /// Address space per process, MiB.
    pub address_space_mb: Option<u64>,
    /// Largest file written, MiB.
    pub file_size_mb: Option<u64>,
    /// Processes.
    pub processes: Option<u64>,
    /// Open files per process.
    pub open_files: Option<u64>,
    /// Memory of all of the run's processes together, MiB.
    pub memory_mb: Option<u64>,
    /// Size of the run's scratch directory (a tmpfs), MiB.
    pub scratch_mb: Option<u64>,
}

/// What a program may reach beyond reading the service root, as written: `writes` (paths
/// below the root it may change), `reads` (deny-listed paths below the root it may still
/// read, e.g. `.git` for git), `network`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAccess {
    #[serde(default)]
    writes: Vec<String>,
    #[serde(default)]
    reads: Vec<String>,
    #[serde(default)]
    network: bool,
}

/// What a program may reach, checked: normalized paths relative to the service root. The
/// protected set is never reachable, whatever is declared here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Access {
    /// Paths below the root the program may create, change and remove things in.
    pub writes: Vec<String>,
    /// Deny-listed paths below the root the program may read all the same.
    pub reads: Vec<String>,
    /// Whether it keeps the host's network (otherwise it gets a network namespace of its own).
    pub network: bool,
}

/// `executor.git`: the program is git, pinned to the service root's work tree.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GitSpec {
    /// Arguments holding a revision: each is checked with `git rev-parse --verify` first.
    #[serde(default)]
    pub revisions: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawElement {
    Text(String),
    Group(RawGroup),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGroup {
    #[serde(rename = "if")]
    cond: String,
    args: Vec<String>,
}

/// The `executor` section as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawExecutor {
    program: String,
    #[serde(default)]
    argv: Vec<RawElement>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    env: Vec<String>,
    #[serde(default)]
    parser: Parser,
    #[serde(default)]
    allow_dash: Vec<String>,
    #[serde(default)]
    retry: Option<Retry>,
    #[serde(default)]
    truncate: Truncate,
    #[serde(default)]
    limits: LimitOverrides,
    #[serde(default)]
    sandbox: RawAccess,
    #[serde(default)]
    timeout_arg: Option<String>,
    #[serde(default)]
    git: Option<GitSpec>,
}

/// One argv element of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Element {
    Literal(String),
    Slot {
        prefix: String,
        name: String,
        suffix: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Template {
    One(Element),
    Group { cond: String, items: Vec<Element> },
}

/// The program a tool runs: as written, and where it was found at load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    /// As written in the manifest.
    pub written: String,
    /// Its canonical path (`None`: not installed on this machine; the tool cannot run).
    pub path: Option<PathBuf>,
}

/// A compiled executor.
#[derive(Debug, Clone)]
pub struct Executor {
    /// The program.
    pub program: Program,
    template: Vec<Template>,
    /// Working directory, relative to the service root.
    pub cwd: String,
    /// Environment variables passed through from the sidecar's environment.
    pub env: Vec<String>,
    /// Output parser.
    pub parser: Parser,
    allow_dash: Vec<String>,
    /// Retries (none by default).
    pub retry: Retry,
    /// Truncation strategy.
    pub truncate: Truncate,
    /// Resource limit overrides.
    pub limits: LimitOverrides,
    /// What the program may reach beyond reading the root.
    pub access: Access,
    /// An integer argument (seconds) that shortens the tool's `timeout_ms` for one call.
    pub timeout_arg: Option<String>,
    /// Set for git tools: run against the root's own work tree only, revisions checked,
    /// deny-listed and protected paths excluded from every pathspec.
    pub git: Option<GitSpec>,
}

/// Executables tools may run: the `[exec] programs` list, each resolved once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Programs {
    list: Vec<Program>,
    /// `false` only for [`Programs::any`].
    check: bool,
}

/// The allowlist used when the config sets none: what the shipped example tools run.
pub const DEFAULT_PROGRAMS: [&str; 3] = ["git", "printf", "npm"];

impl Default for Programs {
    /// [`DEFAULT_PROGRAMS`], looked up on `PATH` once per process (every `Sources` and
    /// config starts from it).
    fn default() -> Self {
        static DEFAULT: std::sync::OnceLock<Programs> = std::sync::OnceLock::new();
        DEFAULT
            .get_or_init(|| Programs::resolve(DEFAULT_PROGRAMS.iter().map(|s| (*s).to_owned())))
            .clone()
    }
}

impl Programs {
    /// Resolves each entry (an absolute path, or a name looked up on `PATH`).
    pub fn resolve(entries: impl IntoIterator<Item = String>) -> Self {
        Programs {
            list: entries
                .into_iter()
                .map(|written| {
                    let path = find_program(&written);
                    Program { written, path }
                })
                .collect(),
            check: true,
        }
    }

    /// A list that allows every program (no allowlist check).
    pub fn any() -> Self {
        Programs {
            list: Vec::new(),
            check: false,
        }
    }

    /// Whether `p` is on the list: the same file once resolved, or (not installed) the same
    /// name as written.
    pub fn allows(&self, p: &Program) -> bool {
        if !self.check {
            return true;
        }
        self.list.iter().any(|a| match (&a.path, &p.path) {
            (Some(x), Some(y)) => x == y,
            (None, None) => a.written == p.written,
            _ => false,
        })
    }

    /// The entries as written, for messages.
    pub fn names(&self) -> Vec<&str> {
        self.list.iter().map(|p| p.written.as_str()).collect()
    }
}

/// An absolute path, or the first executable of that name on `PATH`; canonical.
fn find_program(written: &str) -> Option<PathBuf> {
    let candidate = |p: &Path| -> Option<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(p).ok()?;
        (meta.is_file() && meta.permissions().mode() & 0o111 != 0)
            .then(|| p.canonicalize().ok())
            .flatten()
    };
    if written.contains('/') {
        return Path::new(written)
            .is_absolute()
            .then(|| candidate(Path::new(written)))
            .flatten();
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .find_map(|d| candidate(&d.join(written)))
}

/// Why an executor section is refused: (message, help).
pub type CompileError = (String, String);

impl RawExecutor {
    /// Checks the section against the tool's input schema, path arguments and the allowlist.
    pub fn compile(
        self,
        schema: &Value,
        path_args: &[String],
        programs: &Programs,
    ) -> Result<Executor, CompileError> {
        let program = check_program(&self.program, programs)?;
        let props = schema.get("properties").and_then(Value::as_object);
        let kind = |name: &str| -> Option<&str> {
            props
                .and_then(|p| p.get(name))
                .and_then(|p| p.get("type"))
                .and_then(Value::as_str)
        };
        let element = |t: &str| -> Result<Element, CompileError> {
            let e = parse_element(t)?;
            if let Element::Slot { name, .. } = &e {
                match kind(name) {
                    Some("string" | "integer" | "number") => {}
                    Some(other) => return Err((
                        format!("placeholder `{{{name}}}` is bound to an argument of type {other}"),
                        "placeholders take strings and numbers (one argv element each); use a group `{\"if\": ..., \"args\": [...]}` for booleans".to_owned(),
                    )),
                    None => return Err((
                        format!("placeholder `{{{name}}}` names no declared argument"),
                        "declare it under `inputSchema.properties` with a `type`".to_owned(),
                    )),
                }
            }
            Ok(e)
        };
        let mut template = Vec::with_capacity(self.argv.len());
        for el in &self.argv {
            match el {
                RawElement::Text(t) => template.push(Template::One(element(t)?)),
                RawElement::Group(g) => {
                    if kind(&g.cond).is_none() {
                        return Err((
                            format!("group condition `{}` names no declared argument", g.cond),
                            "`if` takes the name of an argument of the tool".to_owned(),
                        ));
                    }
                    let items = g
                        .args
                        .iter()
                        .map(|t| element(t))
                        .collect::<Result<_, _>>()?;
                    template.push(Template::Group {
                        cond: g.cond.clone(),
                        items,
                    });
                }
            }
        }
        for name in &self.allow_dash {
            if kind(name).is_none() || path_args.contains(name) {
                return Err((
                    format!(
                        "`allow_dash` names `{name}`, which is not a declared non-path argument"
                    ),
                    "list names of arguments that may start with `-`; paths never may".to_owned(),
                ));
            }
        }
        let cwd = match self.cwd.as_deref() {
            None => ".".to_owned(),
            Some(c) => crate::paths::normalize_path(c).map_err(|e| {
                (
                    format!("`executor.cwd` `{c}`: {e}"),
                    "a directory relative to the service root".to_owned(),
                )
            })?,
        };
        for var in &self.env {
            let ok = !var.is_empty()
                && var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                && !var.starts_with("LD_");
            if !ok {
                return Err((
                    format!(
                        "`executor.env` entry `{var}` is not a variable name that may be passed"
                    ),
                    "names of letters, digits and `_`; `LD_*` is never passed".to_owned(),
                ));
            }
        }
        let retry = self.retry.unwrap_or_default();
        if retry.attempts > 5 || retry.backoff_ms > 60_000 {
            return Err((
                "`executor.retry`: at most 5 attempts and 60000 ms backoff".to_owned(),
                "retries are for transient failures; keep them few and short".to_owned(),
            ));
        }
        if self.truncate.lines == Some(0) {
            return Err((
                "`executor.truncate.lines` must be at least 1".to_owned(),
                "omit it to cut by bytes only".to_owned(),
            ));
        }
        let l = self.limits;
        if let Some((name, _)) = [
            ("cpu_secs", l.cpu_secs),
            ("address_space_mb", l.address_space_mb),
            ("file_size_mb", l.file_size_mb),
            ("processes", l.processes),
            ("open_files", l.open_files),
            ("memory_mb", l.memory_mb),
            ("scratch_mb", l.scratch_mb),
        ]
        .into_iter()
        .find(|(_, v)| *v == Some(0))
        {
            return Err((
                format!("`executor.limits.{name}` must be at least 1"),
                "omit it for `[exec.limits]`".to_owned(),
            ));
        }
        let access = compile_access(self.sandbox)?;
        if let Some(t) = &self.timeout_arg
            && kind(t) != Some("integer")
        {
            return Err((
                format!("`executor.timeout_arg` `{t}` is not an integer argument"),
                "name an argument of type integer that holds seconds, e.g. `timeout_s`".to_owned(),
            ));
        }
        if let Some(g) = &self.git {
            if !self
                .argv
                .iter()
                .any(|e| matches!(e, RawElement::Text(t) if t == "--"))
            {
                return Err((
                    "a `git` executor needs a literal `--` in `argv`".to_owned(),
                    "put path arguments after `--`; toolgate adds its pathspec excludes there"
                        .to_owned(),
                ));
            }
            if let Some(r) = g.revisions.iter().find(|r| kind(r) != Some("string")) {
                return Err((
                    format!("`executor.git.revisions` names `{r}`, which is not a string argument"),
                    "list the arguments that hold a revision".to_owned(),
                ));
            }
        }
        Ok(Executor {
            access,
            timeout_arg: self.timeout_arg,
            git: self.git,
            program,
            template,
            cwd,
            env: self.env,
            parser: self.parser,
            allow_dash: self.allow_dash,
            retry,
            truncate: self.truncate,
            limits: self.limits,
        })
    }
}

fn compile_access(raw: RawAccess) -> Result<Access, CompileError> {
    let paths = |key: &str, list: Vec<String>| -> Result<Vec<String>, CompileError> {
        list.into_iter()
            .map(|p| {
                let help = || "paths below the service root, e.g. `target` or `node_modules` (never the root itself)".to_owned();
                match crate::paths::normalize_path(&p) {
                    Ok(n) if n == "." => Err((
                        format!("`executor.sandbox.{key}` entry `{p}` names the whole service root"),
                        help(),
                    )),
                    Ok(n) => Ok(n),
                    Err(e) => Err((format!("`executor.sandbox.{key}` entry `{p}`: {e}"), help())),
                }
            })
            .collect()
    };
    Ok(Access {
        writes: paths("writes", raw.writes)?,
        reads: paths("reads", raw.reads)?,
        network: raw.network,
    })
}

fn check_program(written: &str, programs: &Programs) -> Result<Program, CompileError> {
    if written.is_empty() || (written.contains('/') && !written.starts_with('/')) {
        return Err((
            format!("`executor.program` `{written}` must be an absolute path or a bare name"),
            "e.g. `\"program\": \"git\"` (looked up on PATH once, at load) or `\"/usr/bin/git\"`"
                .to_owned(),
        ));
    }
    let program = Program {
        path: find_program(written),
        written: written.to_owned(),
    };
    if !programs.allows(&program) {
        return Err((
            format!(
                "`executor.program` `{}`{} is not on the allowlist of executables",
                program.written,
                program
                    .path
                    .as_ref()
                    .map(|p| format!(" ({})", p.display()))
                    .unwrap_or_default()
            ),
            format!(
                "add it to `[exec] programs` in the config (now: {})",
                programs.names().join(", ")
            ),
        ));
    }
    Ok(program)
}

/// A literal, or exactly one `{name}` with literal text around it; `{{` and `}}` are
/// literal braces.
fn parse_element(t: &str) -> Result<Element, CompileError> {
    let bad = || {
        (
            format!("argv element `{t}` is not a literal or one `{{placeholder}}`"),
            "write one placeholder per element, e.g. `\"{path}\"` or `\"--max-count={max_count}\"`; `{{` and `}}` are literal braces"
                .to_owned(),
        )
    };
    let mut prefix = String::new();
    let mut suffix = String::new();
    let mut name: Option<String> = None;
    let mut chars = t.chars().peekable();
    while let Some(c) = chars.next() {
        let out = if name.is_some() {
            &mut suffix
        } else {
            &mut prefix
        };
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                out.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                out.push('}');
            }
            '{' => {
                if name.is_some() {
                    return Err(bad());
                }
                let mut n = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(ch) if ch.is_ascii_alphanumeric() || ch == '_' => n.push(ch),
                        _ => return Err(bad()),
                    }
                }
                if n.is_empty() {
                    return Err(bad());
                }
                name = Some(n);
            }
            '}' => return Err(bad()),
            other => out.push(other),
        }
    }
    Ok(match name {
        None => Element::Literal(prefix),
        Some(name) => Element::Slot {
            prefix,
            name,
            suffix,
        },
    })
}

/// Why a call's arguments cannot be turned into an argv.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// A value bound to a whole element starts with `-`.
    #[error("argument `{0}` starts with `-` and would be read as an option")]
    OptionLike(String),
    /// A value holds a NUL byte (cannot be an argv element).
    #[error("argument `{0}` contains a NUL byte")]
    Nul(String),
    /// A path argument the jail refuses.
    #[error("path argument `{name}`: {source}")]
    Path {
        /// The argument.
        name: String,
        /// Why.
        source: JailError,
    },
}

impl Executor {
    /// The argv for `args` (already validated against the input schema).
    pub fn render(
        &self,
        args: &Value,
        path_args: &[String],
        jail: &Jail,
    ) -> Result<Vec<String>, RenderError> {
        let mut argv = Vec::new();
        for t in &self.template {
            match t {
                Template::One(e) => {
                    if let Some(s) = self.element(e, args, path_args, jail)? {
                        let ends_options = s == "--";
                        argv.push(s);
                        if ends_options && self.git.is_some() {
                            argv.extend(git_excludes(jail));
                        }
                    }
                }
                Template::Group { cond, items } => {
                    if matches!(
                        args.get(cond),
                        None | Some(Value::Null | Value::Bool(false))
                    ) {
                        continue;
                    }
                    let mut group = Vec::with_capacity(items.len());
                    for e in items {
                        match self.element(e, args, path_args, jail)? {
                            Some(s) => group.push(s),
                            None => {
                                group.clear();
                                break;
                            }
                        }
                    }
                    argv.extend(group);
                }
            }
        }
        Ok(argv)
    }

    /// One element's text (`None`: its argument is absent).
    fn element(
        &self,
        e: &Element,
        args: &Value,
        path_args: &[String],
        jail: &Jail,
    ) -> Result<Option<String>, RenderError> {
        let (prefix, name, suffix) = match e {
            Element::Literal(l) => return Ok(Some(l.clone())),
            Element::Slot {
                prefix,
                name,
                suffix,
            } => (prefix, name, suffix),
        };
        let value = match args.get(name) {
            Some(Value::String(s)) => s.clone(),
            Some(n @ Value::Number(_)) => n.to_string(),
            // Absent, or a type the load check keeps out of placeholders: left out.
            _ => return Ok(None),
        };
        if value.contains('\0') {
            return Err(RenderError::Nul(name.clone()));
        }
        let value = if path_args.contains(name) {
            jail.locate(&value)
                .map_err(|source| RenderError::Path {
                    name: name.clone(),
                    source,
                })?
                .display()
                .to_string()
        } else {
            value
        };
        if prefix.is_empty() && value.starts_with('-') && !self.allow_dash.contains(name) {
            return Err(RenderError::OptionLike(name.clone()));
        }
        Ok(Some(format!("{prefix}{value}{suffix}")))
    }
}

/// Pathspecs that keep git away from deny-listed names (case-insensitive, at any depth) and
/// from the sidecar's own files below the root, whatever else a call names.
fn git_excludes(jail: &Jail) -> Vec<String> {
    let mut out = Vec::new();
    for entry in jail.deny().entries() {
        out.push(format!(":(exclude,icase,glob)**/{entry}"));
        out.push(format!(":(exclude,icase,glob)**/{entry}/**"));
    }
    for own in jail.own() {
        out.push(format!(":(exclude,literal){own}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_are_literals_or_one_placeholder() {
        assert_eq!(
            parse_element("log").ok(),
            Some(Element::Literal("log".into()))
        );
        assert_eq!(
            parse_element("--max-count={n}").ok(),
            Some(Element::Slot {
                prefix: "--max-count=".into(),
                name: "n".into(),
                suffix: String::new()
            })
        );
        for bad in ["{a}{b}", "{", "}", "{a b}", "{}", "x}{y"] {
            assert!(parse_element(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_element("f() {{ x; }}").ok(),
            Some(Element::Literal("f() { x; }".into()))
        );
        assert_eq!(
            parse_element("@{{{n}}}").ok(),
            Some(Element::Slot {
                prefix: "@{".into(),
                name: "n".into(),
                suffix: "}".into()
            })
        );
    }
}
