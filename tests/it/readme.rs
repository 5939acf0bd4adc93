//! Every command in README.md still answers as shown. The test starts the real binary the way
//! the README does (`serve --config examples/quickstart.toml`, from the checkout's root), on a
//! free port and a data directory of its own given with `--listen` and `--data-dir`, runs the
//! commands of the README's `sh` blocks in order through `sh -c` from the checkout's root, and
//! compares what each prints with the comment lines right under it, where `…` stands for
//! anything.
//!
//! The README's conventions, which this test enforces:
//! - A command is a line of an `sh` block that is not a comment, with its continuation lines
//!   (after a trailing `\`, or while a single quote is open).
//! - Its answer is the comment lines right under it, each without its `#` and leading
//!   spaces, joined together; a blank line ends it. Every command needs one.
//! - `NAME=…` sets `NAME` for the commands after it; its answer is `# NAME=<value>`, and the
//!   value must not be empty.
//! - `# (not checked: why)` marks a command that is neither run nor compared.
//! - `localhost:8181` and `127.0.0.1:8181` become the test server's address.
//! - The two commands of "The two commands" are covered by what this test is: it starts
//!   `serve` with the README's arguments itself, and `cargo test` runs it.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::helpers::repo;
use crate::process::{Server, request};

/// The README's command that starts the sidecar. The test runs the built binary with its
/// arguments (after `--`), plus `--listen` and `--data-dir`.
const SERVE: &str = "cargo run --release -- serve --config examples/quickstart.toml";

/// The README's commands this test stands for instead of running them, and why.
const COVERED: [(&str, &str); 2] = [
    (
        SERVE,
        "the test starts this server itself, on its own port and data directory",
    ),
    ("cargo test", "it runs this test"),
];

/// The address the README's commands use (the quickstart's `listen`).
const README_ADDR: &str = "127.0.0.1:8181";

/// How long one command may take (`?wait=30s` long-polls are the longest).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// One command of an `sh` block.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Shown {
    /// Line of the README where it starts (1-based).
    line: usize,
    /// The command as written.
    text: String,
    /// The comment lines right under it, joined (`None`: there were none).
    answer: Option<String>,
}

impl Shown {
    fn first_line(&self) -> &str {
        self.text.lines().next().unwrap_or_default()
    }
}

/// The commands of every fenced block tagged `sh`, in order. Fails (with the line) on a
/// command whose quotes never close, and on a `curl` hidden in a block of another kind.
fn commands(markdown: &str) -> Result<Vec<Shown>, String> {
    let lines: Vec<&str> = markdown.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(info) = lines[i].trim_start().strip_prefix("```") else {
            i += 1;
            continue;
        };
        let info = info.trim().to_owned();
        let start = i + 1;
        let mut end = start;
        while end < lines.len() && !lines[end].trim_start().starts_with("```") {
            end += 1;
        }
        let block = &lines[start..end.min(lines.len())];
        if info == "sh" {
            out.extend(block_commands(block, start)?);
        } else if let Some(at) = block
            .iter()
            .position(|l| l.trim_start().starts_with("curl "))
        {
            return Err(format!(
                "README.md:{}: a curl command in a ```{info} block: put commands in ```sh blocks so that they are checked",
                start + at + 1
            ));
        }
        i = end + 1;
    }
    Ok(out)
}

/// The commands of one `sh` block whose first line is line `offset` (0-based) of the file.
fn block_commands(block: &[&str], offset: usize) -> Result<Vec<Shown>, String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < block.len() {
        let line = block[i];
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            i += 1;
            continue;
        }
        let first = i;
        let mut text = line.to_owned();
        while text.ends_with('\\') || text.matches('\'').count() % 2 == 1 {
            i += 1;
            let Some(next) = block.get(i) else {
                return Err(format!(
                    "README.md:{}: the command never ends (an open quote or a trailing `\\`)",
                    offset + first + 1
                ));
            };
            text.push('\n');
            text.push_str(next);
        }
        i += 1;
        let mut answer: Option<String> = None;
        while let Some(comment) = block.get(i).and_then(|l| l.trim_start().strip_prefix('#')) {
            answer
                .get_or_insert_with(String::new)
                .push_str(comment.trim());
            i += 1;
        }
        out.push(Shown {
            line: offset + first + 1,
            text,
            answer,
        });
    }
    Ok(out)
}

/// Whether `actual` is `expected` with each `…` standing for any text (empty too). The error
/// says where they part.
fn matches(expected: &str, actual: &str) -> Result<(), String> {
    let pieces: Vec<&str> = expected.split('…').collect();
    let (first, rest) = pieces.split_first().unwrap_or((&"", &[]));
    if rest.is_empty() {
        return if expected == actual {
            Ok(())
        } else {
            Err(parting(expected, actual))
        };
    }
    if !actual.starts_with(first) {
        return Err(parting(first, actual));
    }
    let (last, middle) = rest.split_last().unwrap_or((&"", &[]));
    let Some(end) = actual
        .len()
        .checked_sub(last.len())
        .filter(|e| *e >= first.len() && actual.ends_with(last))
    else {
        return Err(format!(
            "the answer does not end with `{last}` (it ends with `{}`)",
            tail(actual, last.len().max(40))
        ));
    };
    let mut at = first.len();
    for piece in middle {
        match actual.get(at..end).and_then(|window| window.find(piece)) {
            Some(found) => at += found + piece.len(),
            None => {
                let window = actual.get(at..end).unwrap_or_default();
                return Err(closest(piece, window, at));
            }
        }
    }
    Ok(())
}

/// Where `expected` (a prefix, or the whole) and `actual` first differ.
fn parting(expected: &str, actual: &str) -> String {
    let same = expected
        .char_indices()
        .zip(actual.chars())
        .find(|((_, e), a)| e != a)
        .map_or(expected.len().min(actual.len()), |((i, _), _)| i);
    format!(
        "they part at byte {same}: expected `{}`, the answer has `{}`",
        head(expected.get(same..).unwrap_or_default(), 60),
        head(actual.get(same..).unwrap_or_default(), 60)
    )
}

/// For a `piece` missing from `window` (which starts at byte `at` of the answer): where the
/// longest start of it that is there parts from the answer.
fn closest(piece: &str, window: &str, at: usize) -> String {
    let longest = piece
        .char_indices()
        .map(|(i, _)| i)
        .chain([piece.len()])
        .rev()
        .find_map(|k| {
            let start = piece.get(..k)?;
            (k > 0).then(|| window.find(start).map(|p| (k, p)))?
        });
    match longest {
        Some((k, p)) => format!(
            "after `{}` (byte {}), expected `{}`, the answer has `{}`",
            tail(piece.get(..k).unwrap_or_default(), 40),
            at + p + k,
            head(piece.get(k..).unwrap_or_default(), 60),
            head(window.get(p + k..).unwrap_or_default(), 60)
        ),
        None => format!(
            "`{}` is not in the answer after byte {at} (which goes on `{}`)",
            head(piece, 60),
            head(window, 60)
        ),
    }
}

fn head(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

fn tail(s: &str, n: usize) -> String {
    let skip = s.chars().count().saturating_sub(n);
    s.chars().skip(skip).collect()
}

/// The README's `serve` command, run as the built binary from the checkout's root with the
/// README's arguments, on a free loopback port (`--listen`) and with the data directory in
/// `dir` (`--data-dir`), so that the checkout's own `examples/data` is never touched.
fn start_quickstart(dir: &Path) -> Server {
    let args: Vec<&str> = SERVE
        .strip_prefix("cargo run --release -- ")
        .unwrap()
        .split_whitespace()
        .collect();
    let config = args
        .windows(2)
        .find(|w| w[0] == "--config")
        .map(|w| repo().join(w[1]))
        .expect("the README's serve command names a config");
    let table: toml::Table = std::fs::read_to_string(&config).unwrap().parse().unwrap();
    assert_eq!(
        table.get("listen").and_then(toml::Value::as_str),
        Some(README_ADDR),
        "the README's commands talk to the quickstart's `listen`"
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = dir.join("serve.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.args(&args)
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .current_dir(repo());
    for var in [
        "RUST_MIN_STACK",
        "TOOLGATE_KILL_SWITCH",
        "TOOLGATE_CONFIG",
        "TOOLGATE_LISTEN",
        "TOOLGATE_DATA_DIR",
        "TOOLGATE_LOG_FORMAT",
    ] {
        cmd.env_remove(var);
    }
    let child = cmd
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut server = Server { child, port };
    let start = Instant::now();
    while request(port, "GET", "/readyz", None, None).is_none() {
        let exited = server.child.try_wait().unwrap();
        if exited.is_some() || start.elapsed() > Duration::from_secs(30) {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            panic!("toolgate serve did not come up ({exited:?}):\n{log}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        dir.join("data/conf").is_file(),
        "`--data-dir` was not used: no store in {}",
        dir.join("data").display()
    );
    server
}

/// What one command printed on stdout, and how it ended.
struct Ran {
    stdout: String,
    stderr: String,
    ok: bool,
}

/// Runs `script` with `sh -c` in the checkout, with `vars` set, in a process group of its own
/// that is killed whole after [`COMMAND_TIMEOUT`].
fn run(script: &str, vars: &BTreeMap<String, String>) -> Result<Ran, String> {
    use std::os::unix::process::CommandExt as _;
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(script)
        .current_dir(repo())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // Loopback only: a proxy from the environment must not see the requests.
    for var in [
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(vars);
    let mut child = cmd.spawn().map_err(|e| format!("cannot run sh: {e}"))?;
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + COMMAND_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let group = rustix::process::Pid::from_child(&child);
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
            let _ = child.wait();
            return Err(format!("still running after {COMMAND_TIMEOUT:?}; killed"));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Ok(Ran {
        stdout: reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
        ok: status.success(),
    })
}

/// A command's text with the README's address turned into the test server's.
fn aimed(text: &str, port: u16) -> String {
    let addr = format!("127.0.0.1:{port}");
    text.replace("localhost:8181", &addr)
        .replace(README_ADDR, &addr)
}

/// Checks one command against the server on `port`; `vars` gains what it sets.
fn check(
    shown: &Shown,
    port: u16,
    vars: &mut BTreeMap<String, String>,
) -> Result<Option<String>, String> {
    let Some(answer) = &shown.answer else {
        if let Some((_, why)) = COVERED.iter().find(|(c, _)| *c == shown.text) {
            return Ok(Some(format!("covered: {why}")));
        }
        return Err(
            "no answer under it: add `# …` lines with what it prints, or `# (not checked: why)`"
                .to_owned(),
        );
    };
    if let Some(why) = answer.strip_prefix("(not checked") {
        let why = why.trim_start_matches(':').trim_end_matches(')').trim();
        if why.is_empty() {
            return Err("`(not checked)` needs a reason: `# (not checked: why)`".to_owned());
        }
        return Ok(Some(format!("not checked: {why}")));
    }
    let text = aimed(&shown.text, port);
    if text == shown.text && (text.contains("curl ") || text.contains("8181")) {
        return Err(format!(
            "it does not talk to {README_ADDR} (or localhost:8181), the quickstart's address"
        ));
    }
    let name = shown.text.split_once('=').map(|(n, _)| n).filter(|n| {
        !n.is_empty()
            && !n.starts_with(|c: char| c.is_ascii_digit())
            && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    });
    let (script, expected) = match name {
        Some(name) => {
            let Some(value) = answer.strip_prefix(&format!("{name}=")) else {
                return Err(format!(
                    "it sets `{name}`: its answer is `# {name}=<the value>`"
                ));
            };
            (format!("{text}\nprintf '%s' \"${name}\""), value)
        }
        None => (text, answer.as_str()),
    };
    let ran = run(&script, vars)?;
    let got = ran.stdout.trim_end();
    let verdict = if ran.ok {
        matches(expected, got)
    } else {
        Err(format!("it failed; stderr: {}", ran.stderr.trim()))
    };
    verdict.map_err(|why| format!("\n  - expected: {expected}\n  + answered: {got}\n  {why}"))?;
    if let Some(name) = name {
        if got.is_empty() {
            return Err(format!("`{name}` came out empty"));
        }
        vars.insert(name.to_owned(), got.to_owned());
    }
    Ok(None)
}

#[test]
fn every_readme_command_answers_as_shown() {
    assert!(
        Command::new("curl")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success()),
        "the README's commands need curl: install it (.ci/run does)"
    );
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let shown = commands(&readme).unwrap_or_else(|e| panic!("{e}"));
    for (covered, _) in COVERED {
        assert!(
            shown.iter().any(|s| s.text == covered),
            "README.md no longer shows `{covered}`; update COVERED in tests/it/readme.rs with what it shows now"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let server = start_quickstart(dir.path());
    let mut vars = BTreeMap::new();
    let mut failures = Vec::new();
    let mut checked = 0;
    for s in &shown {
        match check(s, server.port, &mut vars) {
            Ok(None) => checked += 1,
            Ok(Some(note)) => eprintln!("README.md:{}: {} ({note})", s.line, s.first_line()),
            Err(why) => failures.push(format!("README.md:{}: `{}`: {why}", s.line, s.first_line())),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} README commands do not answer as shown:\n\n{}\n\nserve's log:\n{}",
        failures.len(),
        shown.len(),
        failures.join("\n\n"),
        std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default()
    );
    assert!(checked >= 10, "only {checked} README commands were checked");
}

/// The README stays an entry point: short, and linking every page of `docs/`, every link
/// leading to a file that exists.
#[test]
fn the_readme_is_short_and_links_every_docs_page() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    assert!(
        readme.len() <= 12 * 1024,
        "README.md is {} bytes; keep it to 12 KiB and move detail to docs/",
        readme.len()
    );
    let mut targets = Vec::new();
    for piece in readme.split("](").skip(1) {
        let target = piece.split([')', ' ']).next().unwrap_or_default();
        if !target.contains("://") && !target.starts_with('#') {
            targets.push(target.split('#').next().unwrap_or_default().to_owned());
        }
    }
    for target in &targets {
        assert!(
            repo().join(target).exists(),
            "README.md links to `{target}`, which does not exist"
        );
    }
    for entry in std::fs::read_dir(repo().join("docs")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") {
            let page = format!("docs/{name}");
            assert!(targets.contains(&page), "README.md does not link to {page}");
        }
    }
}

#[test]
fn wildcards_stand_for_any_text_and_nothing_else_differs() {
    let answer = r#"{"decision":"allow","decision_id":"01a2","reasons":["a","b"],"errors":[]}"#;
    for good in [
        answer,
        r#"{"decision":"allow",…}"#,
        r#"{"decision":"allow","decision_id":"…","reasons":[…],"errors":[]}"#,
        r#"…"reasons":["a",…"#,
        "…",
    ] {
        assert_eq!(matches(good, answer), Ok(()), "{good}");
    }
    for bad in [
        r#"{"decision":"deny",…}"#,
        r#"{"decision":"allow",…,"errors":[{"code":"x"}]}"#,
        r#"{"decision":"allow","reasons":[…],…}"#,
        r#"…"errors":[],"reasons":…"#,
        r#"{"decision":"allow"}"#,
        "",
    ] {
        assert!(matches(bad, answer).is_err(), "{bad} matched");
    }
    // A middle piece may not reuse the text the end needs.
    assert!(matches("ab…b", "ab").is_err());
    let why = matches(r#"{"decision":"deny",…}"#, answer).unwrap_err();
    assert!(why.contains("byte 13"), "{why}");
}

#[test]
fn commands_are_read_with_their_answers_and_unanswered_ones_are_reported() {
    let md = "```sh\n# why\ncurl -s a \\\n  -d '{\"x\":\n  1}'\n# {\"ok\":\n#  true}\n\nX=$(curl b)\n# X=…\nfoo\n```\n";
    let shown = commands(md).unwrap();
    assert_eq!(shown.len(), 3);
    assert_eq!(shown[0].line, 3);
    assert_eq!(shown[0].text, "curl -s a \\\n  -d '{\"x\":\n  1}'");
    assert_eq!(shown[0].answer.as_deref(), Some("{\"ok\":true}"));
    assert_eq!(shown[1].answer.as_deref(), Some("X=…"));
    assert_eq!(shown[2].answer, None);
    let mut vars = BTreeMap::new();
    let why = check(&shown[2], 1, &mut vars).unwrap_err();
    assert!(why.contains("no answer"), "{why}");
    assert!(commands("```bash\ncurl x\n```\n").is_err());
    assert!(commands("```sh\ncurl 'x\n```\n").is_err());
}
